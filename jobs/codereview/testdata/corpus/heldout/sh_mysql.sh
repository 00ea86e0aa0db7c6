#!/bin/bash
id="$1"
mysql -u app -e "SELECT * FROM orders WHERE id = $id" shop # want: sql-injection

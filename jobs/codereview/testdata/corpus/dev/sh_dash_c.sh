#!/bin/bash
name="$1"
bash -c "tar czf /backup/$name.tgz /srv/data" # want: command-injection
ssh deploy@example.org "rm -rf /srv/releases/$name" # want: command-injection

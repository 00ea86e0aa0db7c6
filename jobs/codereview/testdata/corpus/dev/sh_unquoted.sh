#!/bin/bash
set -e
rm -rf $BUILD_DIR/out # want: command-injection
cp $1 /srv/incoming/ # want: command-injection
echo "done: $1"

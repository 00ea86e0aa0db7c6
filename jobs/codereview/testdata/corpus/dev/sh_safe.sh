#!/bin/bash
set -euo pipefail
dir="$1"
rm -rf -- "$dir/out"
bash -c 'tar czf "/backup/$1.tgz" /srv/data' _ "$dir"
echo Copied $dir
eval "$(ssh-agent -s)"
if [ -n "$dir" ]; then cp -- "$dir/a" "$dir/b"; fi

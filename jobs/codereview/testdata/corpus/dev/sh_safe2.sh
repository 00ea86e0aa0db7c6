#!/bin/sh
: "${GITHUB_TOKEN:?set GITHUB_TOKEN}"
for f in "$@"; do
  cp -- "$f" "/srv/incoming/$(basename -- "$f")"
done
curl -fsS -H "Authorization: token ${GITHUB_TOKEN}" https://api.github.com/user

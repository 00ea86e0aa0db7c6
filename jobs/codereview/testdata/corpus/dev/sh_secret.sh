#!/bin/sh
export GITHUB_TOKEN=@@SECRET:github-pat@@ # want: hardcoded-secret
curl -H "Authorization: token $GITHUB_TOKEN" https://api.github.com/user

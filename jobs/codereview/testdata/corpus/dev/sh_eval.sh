#!/bin/sh
# Runs whatever the caller passes.
eval "$1" # want: code-eval
CMD="ls $DIR"
eval $CMD # want: code-eval

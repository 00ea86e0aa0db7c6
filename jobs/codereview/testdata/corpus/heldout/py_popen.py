import os
import subprocess


def read(fname):
    return os.popen("cat " + fname).read()  # want: command-injection


def run(cmd):
    return subprocess.Popen(cmd, shell=True)  # want: command-injection


def safe(fname):
    return subprocess.check_output(["cat", fname])

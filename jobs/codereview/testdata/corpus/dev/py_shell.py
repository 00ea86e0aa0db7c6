import os
import subprocess


def ping(host):
    os.system("ping -c 1 " + host)  # want: command-injection


def listing(path):
    return subprocess.run(f"ls -la {path}", shell=True, capture_output=True)  # want: command-injection


def backup(target):
    subprocess.check_call(["sh", "-c", "tar czf /tmp/b.tgz " + target])  # want: command-injection

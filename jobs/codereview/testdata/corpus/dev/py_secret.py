import requests

GITHUB_TOKEN = "@@SECRET:github-pat@@"  # want: hardcoded-secret


def repos():
    return requests.get("https://api.github.com/user/repos", headers={"Authorization": "token " + GITHUB_TOKEN})


AWS_ACCESS_KEY_ID = "@@SECRET:aws@@"  # want: hardcoded-secret

package notify

import "net/http"

const slackToken = "@@SECRET:slack-bot@@" // want: hardcoded-secret

func Post(req *http.Request) {
	req.Header.Set("Authorization", "Bearer "+slackToken)
}

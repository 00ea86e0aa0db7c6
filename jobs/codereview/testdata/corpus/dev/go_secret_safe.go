package notify

import (
	"net/http"
	"os"
)

// Set SLACK_TOKEN to a bot token such as xoxb-your-token-here.
func Post(req *http.Request) {
	token := os.Getenv("SLACK_TOKEN")
	req.Header.Set("Authorization", "Bearer "+token)
}

package backup

import (
	"context"
	"os/exec"
)

func Archive(ctx context.Context, dir string) error {
	cmd := exec.CommandContext(ctx, "sh", "-c", "tar czf /tmp/backup.tgz "+dir) // want: command-injection
	return cmd.Run()
}

func Grep(pattern, file string) ([]byte, error) {
	return exec.Command("bash", "-c", "grep "+pattern+" "+file).Output() // want: command-injection
}

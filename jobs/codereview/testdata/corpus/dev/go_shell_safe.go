package backup

import (
	"context"
	"os/exec"
)

func Archive(ctx context.Context, dir string) error {
	return exec.CommandContext(ctx, "tar", "czf", "/tmp/backup.tgz", "--", dir).Run()
}

func Hello(ctx context.Context) ([]byte, error) {
	return exec.CommandContext(ctx, "sh", "-c", "echo hello | tr a-z A-Z").Output()
}

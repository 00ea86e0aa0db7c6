package nodetest

import (
	"os"
	"syscall"
	"time"
)

// Terminate asks a node process to end (SIGTERM, which lets it save its
// state) and waits for exited to close; after grace it kills the process
// and waits again.
func Terminate(p *os.Process, exited <-chan struct{}, grace time.Duration) {
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(grace):
		_ = p.Kill()
		<-exited
	}
}

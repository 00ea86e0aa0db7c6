// Command screenshots takes the pictures of docs/screenshots from a running
// service, as its users see it: start it with `go tool task run` (with
// OPS_TOKEN set for the dashboard's pages), make a few paid calls
// (`go run ./cmd/x402d pay ...`), then run `go tool task screenshots`.
// It drives the system Chromium, headless. The index's pictures need a
// market with on-chain figures: scripts/screenshots/sellers serves demo
// sellers and pays them on the devchain, and says how to start the service
// reading them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/launcher"
	"github.com/go-rod/rod/lib/proto"
)

func main() {
	base := flag.String("url", "http://127.0.0.1:8080", "the running service")
	token := flag.String("token", os.Getenv("OPS_TOKEN"), "the operator token (default $OPS_TOKEN); without it the dashboard is not taken")
	dir := flag.String("dir", filepath.Join("docs", "screenshots"), "where the pictures are written")
	host := flag.String("host", "", "the index host whose page is taken (default: the first the index page lists)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *base, *token, *dir, *host); err != nil {
		fmt.Fprintln(os.Stderr, "screenshots:", err)
		os.Exit(1)
	}
}

// run writes each page's picture into dir; host is the index host whose
// page is taken, or "" for the first the index page lists.
func run(ctx context.Context, base, token, dir, host string) error {
	bin, err := exec.LookPath("chromium")
	if err != nil {
		return errors.New("the system Chromium is needed: go tool task chromium (apt-get install -y chromium)")
	}
	profile, err := os.MkdirTemp("", "screenshots-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(profile)
	l := launcher.New().Bin(bin).UserDataDir(profile).Leakless(false).Headless(true).
		Set("no-sandbox").Set("disable-gpu").Set("disable-background-networking").Set("disable-component-update").
		Set("disable-sync").Set("no-first-run").Set("disable-dev-shm-usage").Set("hide-scrollbars")
	u, err := l.Launch()
	if err != nil {
		return fmt.Errorf("start chromium: %w", err)
	}
	defer l.Cleanup()
	defer l.Kill()
	browser := rod.New().Context(ctx).ControlURL(u)
	if err := browser.Connect(); err != nil {
		return fmt.Errorf("connect to chromium: %w", err)
	}
	defer browser.Close()
	page, err := browser.Page(proto.TargetCreateTarget{})
	if err != nil {
		return err
	}
	if err := page.SetViewport(&proto.EmulationSetDeviceMetricsOverride{Width: 1265, Height: 900, DeviceScaleFactor: 1}); err != nil {
		return err
	}
	shots := []struct{ path, file string }{{"/", "front.png"}, {"/x402-index", "x402-index.png"}}
	if token != "" {
		if _, err := page.SetExtraHeaders([]string{"Authorization", "Bearer " + token}); err != nil {
			return err
		}
		shots = append(shots,
			struct{ path, file string }{"/ops", "ops-overview.png"},
			struct{ path, file string }{"/ops/calls", "ops-calls.png"},
			struct{ path, file string }{"/ops/index", "ops-index.png"},
			struct{ path, file string }{"/ops/jobs/jobs?state=completed", "ops-jobs.png"},
		)
	}
	for _, s := range shots {
		if err := shoot(page, base+s.path, filepath.Join(dir, s.file)); err != nil {
			return err
		}
	}
	// A host's page: host's, or the first host of the index page.
	hostURL := base + "/x402-index/hosts/" + url.PathEscape(host)
	if host == "" {
		if err := open(page, base+"/x402-index"); err != nil {
			return err
		}
		hostLink, err := page.Timeout(10 * time.Second).Element(`td.host a`)
		if err != nil {
			return fmt.Errorf("/x402-index lists no host: let the index crawl first: %w", err)
		}
		hostHref, err := hostLink.Property("href")
		if err != nil {
			return err
		}
		hostURL = hostHref.String()
	}
	if err := shoot(page, hostURL, filepath.Join(dir, "x402-index-host.png")); err != nil {
		return err
	}
	if token == "" {
		return nil
	}
	// A call's timeline: the newest call of the list.
	if err := open(page, base+"/ops/calls"); err != nil {
		return err
	}
	link, err := page.Timeout(10 * time.Second).Element(`tr[data-call] a`)
	if err != nil {
		return fmt.Errorf("/ops/calls lists no call: make a paid call first: %w", err)
	}
	href, err := link.Property("href")
	if err != nil {
		return err
	}
	return shoot(page, href.String(), filepath.Join(dir, "ops-call-timeline.png"))
}

// open loads url in page and waits for it to settle (the River UI renders
// after its load).
func open(page *rod.Page, url string) error {
	if err := page.Navigate(url); err != nil {
		return fmt.Errorf("open %s: %w", url, err)
	}
	if err := page.WaitLoad(); err != nil {
		return fmt.Errorf("load %s: %w", url, err)
	}
	return page.Timeout(10 * time.Second).WaitStable(time.Second)
}

// shoot writes the picture of the whole page at url to file.
func shoot(page *rod.Page, url, file string) error {
	if err := open(page, url); err != nil {
		return err
	}
	img, err := page.Screenshot(true, &proto.PageCaptureScreenshot{Format: proto.PageCaptureScreenshotFormatPng})
	if err != nil {
		return fmt.Errorf("screenshot %s: %w", url, err)
	}
	if err := os.WriteFile(file, img, 0o644); err != nil {
		return err
	}
	fmt.Println(file)
	return nil
}

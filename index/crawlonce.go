package index

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/schollz/progressbar/v3"
)

// CrawlOnce runs one full pass of every source now (x402d index crawl): a
// progress bar per source on w, then the summary. A source given up is
// reported in the returned error after the summary is written, so what the
// other sources gave is still shown.
func CrawlOnce(ctx context.Context, c *Crawler, r *Reader, w io.Writer) (*Summary, error) {
	var bar *progressbar.ProgressBar
	source := ""
	finish := func() {
		if bar != nil {
			_ = bar.Finish()
			fmt.Fprintln(w)
		}
	}
	crawlErr := c.FullPass(ctx, func(s Step) {
		if s.Source != source {
			finish()
			source = s.Source
			bar = progressbar.NewOptions(-1, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(s.Source),
				progressbar.OptionShowCount(), progressbar.OptionSetItsString("items"), progressbar.OptionSetWidth(30),
				progressbar.OptionThrottle(0))
		}
		if s.Total > 0 && bar.GetMax() != s.Total {
			bar.ChangeMax(s.Total)
		}
		_ = bar.Set(s.Cursor)
	})
	finish()
	if errors.Is(crawlErr, context.Canceled) || errors.Is(crawlErr, context.DeadlineExceeded) {
		return nil, crawlErr
	}
	s, err := r.Summary(ctx)
	if err != nil {
		return nil, errors.Join(crawlErr, err)
	}
	fmt.Fprintf(w, "services indexed %d, hosts %d, full scans %d\n", s.ServicesIndexed, s.HostsKnown, s.Crawl.FullScans)
	fmt.Fprintf(w, "priced: free %d, <0.001 %d, <0.01 %d, <0.1 %d, <1 %d, >=1 %d USDC\n",
		s.PriceBands["free"], s.PriceBands["under_1m"], s.PriceBands["under_10m"],
		s.PriceBands["under_100m"], s.PriceBands["under_1"], s.PriceBands["over_1"])
	fmt.Fprintf(w, "liveness: %d live, %d dead, %d not measured\n", s.Liveness.Live, s.Liveness.Dead, s.Liveness.Unmeasured)
	if crawlErr != nil {
		fmt.Fprintf(w, "incomplete: %v\n", crawlErr)
	}
	return s, crawlErr
}

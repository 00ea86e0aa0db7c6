package index

import (
	"fmt"
	"html/template"
	"strings"
	"time"
)

// chartHours is the span of a host's probe chart: 30 days by hour.
const chartHours = 30 * 24

// ProbeChart draws a host's probes of the 30 days before now as an SVG
// (no script): one column an hour, its upper band the share of the hour's
// probes that found the host live (green all, red none, amber some), its
// lower band the hour's median latency against the highest of the span.
// Hours without a probe are left empty.
func ProbeChart(probes []ProbeHour, now time.Time) template.HTML {
	const (
		top, band, gap, latBand, bottom = 16, 60, 14, 40, 18
		height                          = top + band + gap + latBand + bottom
	)
	end := now.UTC().Truncate(time.Hour)
	start := end.Add(-(chartHours - 1) * time.Hour)
	maxLatency := 0
	for _, p := range probes {
		if p.LatencyP50MS != nil && *p.LatencyP50MS > maxLatency {
			maxLatency = *p.LatencyP50MS
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" role="img" viewBox="0 0 %d %d" width="100%%" xmlns="http://www.w3.org/2000/svg">`, chartHours, height)
	fmt.Fprintf(&b, `<title>Probes over 30 days: uptime by hour above, median latency below</title>`)
	fmt.Fprintf(&b, `<rect x="0" y="%d" width="%d" height="%d" fill="#f3f4f6"/>`, top, chartHours, band)
	fmt.Fprintf(&b, `<rect x="0" y="%d" width="%d" height="%d" fill="#f3f4f6"/>`, top+band+gap, chartHours, latBand)
	for d := 1; d < 30; d++ {
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#e5e7eb" stroke-width="0.5"/>`, d*24, top, d*24, top+band+gap+latBand)
	}
	drawn := 0
	for _, p := range probes {
		slot := int(p.Hour.UTC().Sub(start) / time.Hour)
		if slot < 0 || slot >= chartHours || p.Probes == 0 {
			continue
		}
		drawn++
		share := float64(p.Live) / float64(p.Probes)
		colour := "#f59e0b"
		switch p.Live {
		case p.Probes:
			colour = "#16a34a"
		case 0:
			colour = "#dc2626"
		}
		h := max(share*band, 2)
		fmt.Fprintf(&b, `<rect class="probe" x="%d" y="%.1f" width="1" height="%.1f" fill="%s"><title>%s: %d of %d probes live</title></rect>`,
			slot, float64(top+band)-h, h, colour, p.Hour.UTC().Format("2006-01-02 15:00"), p.Live, p.Probes)
		if p.LatencyP50MS != nil && maxLatency > 0 {
			lh := max(float64(*p.LatencyP50MS)/float64(maxLatency)*latBand, 1)
			fmt.Fprintf(&b, `<rect class="latency" x="%d" y="%.1f" width="1" height="%.1f" fill="#2563eb"><title>%s: median %d ms</title></rect>`,
				slot, float64(top+band+gap+latBand)-lh, lh, p.Hour.UTC().Format("2006-01-02 15:00"), *p.LatencyP50MS)
		}
	}
	fmt.Fprintf(&b, `<text x="0" y="11" font-size="10" fill="#5b6470">uptime by hour</text>`)
	fmt.Fprintf(&b, `<text x="0" y="%d" font-size="10" fill="#5b6470">median latency (top: %d ms)</text>`, top+band+11, maxLatency)
	fmt.Fprintf(&b, `<text x="0" y="%d" font-size="10" fill="#5b6470">%s</text>`, height-4, start.Format("2006-01-02"))
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10" fill="#5b6470" text-anchor="end">now</text>`, chartHours, height-4)
	if drawn == 0 {
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="12" fill="#374151" text-anchor="middle">not measured in 30 days</text>`, chartHours/2, top+band/2)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

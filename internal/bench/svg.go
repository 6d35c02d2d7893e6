package bench

import (
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"
)

// writeSVG draws two horizontal bar charts by hand (no dependencies): throughput of
// every row and configuration, and the end-to-end latency percentiles of the rows that
// have them, with the 500 ms p99 target marked.
func writeSVG(w io.Writer, rep *Report) error {
	const (
		width  = 1000
		labelW = 430
		barW   = 460
		rowH   = 22
		top    = 40
	)
	var lat []Summary
	maxRate, maxLat := 0.0, 500.0
	for _, s := range rep.Summaries {
		if !math.IsNaN(s.MsgPerSec) {
			maxRate = math.Max(maxRate, s.MsgPerSec)
		}
		if s.Latency != nil {
			lat = append(lat, s)
			for _, v := range []float64{s.Latency.P50, s.Latency.P95, s.Latency.P99} {
				if !math.IsNaN(v) {
					maxLat = math.Max(maxLat, v)
				}
			}
		}
	}
	if maxRate == 0 {
		maxRate = 1
	}
	latTop := top + len(rep.Summaries)*rowH + 70
	height := latTop + len(lat)*3*(rowH-6) + len(lat)*10 + 60

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="15" font-weight="bold">Throughput (msg/s, median of %v repetition(s))</text>`+"\n", rep.Settings["reps"])
	colors := map[string]string{rowBroker: "#777777", rowNaive: "#d62728", rowIngest: "#1f77b4", rowIngestPrune: "#17becf", rowE2ESweeper: "#2ca02c", rowE2EWebhook: "#9467bd"}
	for i, s := range rep.Summaries {
		y := top + i*rowH
		v := s.MsgPerSec
		if math.IsNaN(v) {
			v = 0
		}
		bw := v / maxRate * barW
		color := colors[s.Row]
		if !s.OK {
			color = "#ff9900"
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end" font-size="11">%s</text>`+"\n", labelW-6, y+14, label(fmt.Sprintf("%s N=%d %s", s.Row, s.N, s.Config)))
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", labelW, y+2, bw, rowH-6, color)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d">%.0f</text>`+"\n", float64(labelW)+bw+4, y+14, v)
	}

	fmt.Fprintf(&b, `<text x="10" y="%d" font-size="15" font-weight="bold">End-to-end latency, publish → PROCESSED (ms, p50 / p95 / p99)</text>`+"\n", latTop-20)
	if len(lat) == 0 {
		fmt.Fprintf(&b, `<text x="10" y="%d">no end-to-end rows in this run</text>`+"\n", latTop+10)
	}
	y := latTop
	pcts := []struct {
		name  string
		color string
		get   func(*Latency) float64
	}{
		{"p50", "#9ecae1", func(l *Latency) float64 { return l.P50 }},
		{"p95", "#4292c6", func(l *Latency) float64 { return l.P95 }},
		{"p99", "#08519c", func(l *Latency) float64 { return l.P99 }},
	}
	for _, s := range lat {
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end" font-size="11">%s</text>`+"\n", labelW-6, y+12, label(fmt.Sprintf("%s %s", s.Row, s.Config)))
		for _, p := range pcts {
			v := p.get(s.Latency)
			if math.IsNaN(v) {
				v = 0
			}
			bw := v / maxLat * barW
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", labelW, y+2, bw, rowH-8, p.color)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s %.0f</text>`+"\n", float64(labelW)+bw+4, y+12, p.name, v)
			y += rowH - 6
		}
		y += 10
	}
	if len(lat) > 0 {
		x := float64(labelW) + 500/maxLat*barW
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#d62728" stroke-dasharray="4 3"/>`+"\n", x, latTop-4, x, y)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" fill="#d62728">p99 target 500 ms</text>`+"\n", x+4, y+14)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// label shortens a bar's label to what fits left of the bars.
func label(s string) string {
	const maxRunes = 66
	r := []rune(s)
	if len(r) <= maxRunes {
		return esc(s)
	}
	return esc(string(r[:maxRunes-1]) + "…")
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

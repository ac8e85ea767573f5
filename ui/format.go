package ui

import (
	"fmt"
	"html/template"
	"math"
	"net/url"
	"strconv"
	"time"
)

const timeFormat = "2006-01-02 15:04:05.000Z07:00"

// fmtTime shows a server time in UTC, "-" for none.
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(timeFormat)
}

// fmtDur shows a duration rounded to what a reader needs.
func fmtDur(d time.Duration) string {
	neg := d < 0
	if neg {
		d = -d
	}
	var s string
	switch {
	case d >= time.Hour:
		s = d.Round(time.Minute).String()
	case d >= time.Minute:
		s = d.Round(time.Second).String()
	case d >= time.Second:
		s = strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	default:
		s = d.Round(time.Millisecond).String()
	}
	if neg {
		return "-" + s
	}
	return s
}

// ago says how long before now t was.
func ago(now, t time.Time) string {
	if t.IsZero() || now.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	if d < 0 {
		return "in " + fmtDur(-d)
	}
	return fmtDur(d) + " ago"
}

func (h *Handler) funcs() template.FuncMap {
	return template.FuncMap{
		"time":     fmtTime,
		"dur":      fmtDur,
		"ago":      ago,
		"redact":   func(s string) string { return h.cfg.redact(s) },
		"path":     func(p string) string { return h.cfg.prefix + p },
		"jobhref":  func(name string) string { return h.cfg.prefix + "/jobs/" + pathEscape(name) },
		"lockhref": func(id string) string { return h.cfg.prefix + "/locks/" + pathEscape(id) },
		"esc":      url.PathEscape,
		"q":        url.QueryEscape,
		"fence":    func(f uint64) string { return strconv.FormatUint(f, 10) },
		"short": func(s string, n int) string {
			if len(s) <= n {
				return s
			}
			return s[:n]
		},
		"secs":     func(d time.Duration) string { return strconv.FormatFloat(math.Round(d.Seconds()*10)/10, 'f', 1, 64) },
		"add":      func(a, b int) int { return a + b },
		"neg":      func(d time.Duration) time.Duration { return -d },
		"symbol":   func(c class) string { return symbolOf(c) },
		"keyshape": func(c class) string { return shape(c, 8, 8) },
		"printf":   fmt.Sprintf,
	}
}

package ui

import (
	"fmt"
	"html/template"
	"math"
	"net/url"
	"strconv"
	"strings"
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
		"path":     func(p string) string { return h.cfg.prefix + p },
		"jobhref":  h.jobHref,
		"lockhref": h.lockHref,
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

// jobHref is the address of job name's page, lockHref of lock id's: no
// name can make it another page's (see namePath).
func (h *Handler) jobHref(name string) string { return h.href("/jobs/", "name", name) }
func (h *Handler) lockHref(id string) string  { return h.href("/locks/", "id", id) }

// href is the address of the page of name under base: base and the name
// as a path (namePath), or, for a name no path can hold, base with the
// name in the query parameter param.
func (h *Handler) href(base, param, name string) string {
	if p, ok := namePath(name); ok {
		return h.cfg.prefix + base + p
	}
	return h.cfg.prefix + base + "?" + param + "=" + url.QueryEscape(name)
}

// namePath is name as path segments: each escaped (url.PathEscape), and a
// slash kept only between two segments that are neither empty nor "." or
// "..", else escaped (%2F) too, so that no segment of the path is empty,
// "." or "..", which browsers resolve (escaped as %2E too) and servers
// clean: "../admin" is one segment, "..%2Fadmin". ok is false for the
// names that are such a segment themselves: "", "." and "..".
func namePath(name string) (p string, ok bool) {
	if name == "" || name == "." || name == ".." {
		return "", false
	}
	ordinary := func(s string) bool { return s != "" && s != "." && s != ".." }
	segs := strings.Split(name, "/")
	var b strings.Builder
	for i, s := range segs {
		if i > 0 {
			if ordinary(segs[i-1]) && ordinary(s) {
				b.WriteByte('/')
			} else {
				b.WriteString("%2F")
			}
		}
		b.WriteString(url.PathEscape(s))
	}
	return b.String(), true
}

// withQuery adds the query q to the address u, which may have one.
func withQuery(u, q string) string {
	if strings.Contains(u, "?") {
		return u + "&" + q
	}
	return u + "?" + q
}

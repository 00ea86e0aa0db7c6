package retryafter

import (
	"net/http"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		v    string
		want time.Duration
		ok   bool
	}{
		{"empty", "", 0, false},
		{"blank", "   ", 0, false},
		{"seconds", "120", 2 * time.Minute, true},
		{"seconds with spaces", " 7 ", 7 * time.Second, true},
		{"zero", "0", 0, true},
		{"negative", "-1", 0, false},
		{"a year of seconds", "31536000", Max, true},
		{"more than a year", "31536001", Max, true},
		{"seconds that overflow a Duration", "9223372036854775807", Max, true},
		{"seconds beyond int64", "99999999999999999999", 0, false},
		{"fraction", "1.5", 0, false},
		{"garbage", "soon", 0, false},
		{"IMF-fixdate ahead", now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{"IMF-fixdate past", now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{"RFC 850 date", now.Add(time.Hour).Format(time.RFC850), time.Hour, true},
		{"ANSI C date", now.Add(2 * time.Hour).Format(time.ANSIC), 2 * time.Hour, true},
		{"date far ahead", "Fri, 31 Dec 9999 23:59:59 GMT", Max, true},
		{"date far past", "Mon, 01 Jan 0001 00:00:00 GMT", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Parse(tt.v, now)
			if got != tt.want || ok != tt.ok {
				t.Fatalf("Parse(%q) = %v, %v; want %v, %v", tt.v, got, ok, tt.want, tt.ok)
			}
		})
	}
}

package dataclean

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/x402d/x402d/internal/table"
)

// Quality are the quality checks of a table, before or after cleaning.
type Quality struct {
	// Rows counts the data rows (the header is not a row).
	Rows int `json:"rows"`
	// Columns counts the columns.
	Columns int `json:"columns"`
	// EmptyRows counts rows whose every cell is empty or white space.
	EmptyRows int `json:"empty_rows"`
	// DuplicateRows counts non-empty rows equal, once trimmed, to an earlier
	// row.
	DuplicateRows int `json:"duplicate_rows"`
	// MissingCells counts empty cells (null, "" or white space only) and
	// cells a short row lacks.
	MissingCells int `json:"missing_cells"`
	// CellsTrimmed counts cells with white space at either end.
	CellsTrimmed int `json:"cells_trimmed"`
}

// Column describes one column of the cleaned table.
type Column struct {
	Name string `json:"name"`
	// Type is the column's type: integer, number, boolean, string, object,
	// array, or null when every cell is empty.
	Type    string `json:"type"`
	NonNull int    `json:"non_null"`
	Nulls   int    `json:"nulls"`
	// Unique counts distinct non-null values.
	Unique int `json:"unique"`
	// Min and Max are numbers for integer and number columns (as written),
	// strings for string columns (in byte order), else null.
	Min any `json:"min"`
	Max any `json:"max"`
	// Mean is the average of a numeric column, else null.
	Mean *float64 `json:"mean"`
}

// cleaned is the deterministic part of a result.
type cleaned struct {
	format    table.Format
	delimiter string
	header    []string
	rows      [][]table.Value
	csv       string
	before    Quality
	after     Quality
	columns   []Column
	notes     []string
}

// clean cleans t, parsed from raw: header names made unique, ragged rows
// made rectangular, cells trimmed (and CSV cells typed again), empty and
// duplicate rows dropped. It never calls the model.
func clean(t *table.Table, raw string) *cleaned {
	c := &cleaned{format: t.Format}
	if t.Delimiter != 0 {
		c.delimiter = string(t.Delimiter)
	}
	csvInput := t.Format != table.JSON

	// Width: the header's, or wider when long rows carry data beyond it.
	width := len(t.Header)
	short, long, longData := []int{}, []int{}, false
	for i, row := range t.Rows {
		switch {
		case len(row) < len(t.Header):
			short = append(short, lineOf(t, i))
		case len(row) > len(t.Header):
			long = append(long, lineOf(t, i))
			for _, v := range row[len(t.Header):] {
				if strings.TrimSpace(v.Text) != "" {
					longData = true
					width = max(width, len(row))
				}
			}
		}
	}

	// Header: trimmed, then every name distinct and non-empty.
	raws := make([]string, width)
	for i := range raws {
		if i < len(t.Header) {
			raws[i] = strings.TrimSpace(t.Header[i])
		}
	}
	c.header = table.UniqueNames(raws)

	// Rows: rectangular, trimmed, typed; empty and duplicate ones dropped.
	seen := map[string]bool{}
	var emptyLines, dupLines []int
	c.before = Quality{Rows: len(t.Rows), Columns: len(t.Header)}
	for i, row := range t.Rows {
		out := make([]table.Value, width)
		empty := true
		for j := range width {
			if j >= len(row) {
				out[j] = table.Value{Type: table.Null}
				if j < len(t.Header) {
					c.before.MissingCells++
				}
				continue
			}
			v := row[j]
			if v.Type == table.String || csvInput {
				trimmed := strings.TrimSpace(v.Text)
				if trimmed != v.Text {
					c.before.CellsTrimmed++
				}
				v.Text = trimmed
				if csvInput {
					v.Type = table.Infer(trimmed)
				}
			}
			if isMissing(v) {
				if j < len(t.Header) {
					c.before.MissingCells++
				}
			} else {
				empty = false
			}
			out[j] = v
		}
		if empty {
			c.before.EmptyRows++
			emptyLines = append(emptyLines, lineOf(t, i))
			continue
		}
		key := rowKey(out)
		if seen[key] {
			c.before.DuplicateRows++
			dupLines = append(dupLines, lineOf(t, i))
			continue
		}
		seen[key] = true
		c.rows = append(c.rows, out)
	}

	c.csv = table.Encode(c.header, c.rows, ',')
	c.columns = columnStats(c.header, c.rows)
	c.after = Quality{Rows: len(c.rows), Columns: width}
	for _, row := range c.rows {
		for _, v := range row {
			if isMissing(v) {
				c.after.MissingCells++
			}
		}
	}

	c.notes = factNotes(t, raw, raws, c.header, short, long, longData, emptyLines, dupLines, c.before.CellsTrimmed)
	return c
}

// lineOf returns the line row i starts on (its position for JSON input
// without line numbers).
func lineOf(t *table.Table, i int) int {
	if i < len(t.Lines) {
		return t.Lines[i]
	}
	return i + 2
}

// isMissing reports whether v is an empty cell.
func isMissing(v table.Value) bool { return v.Type == table.Null || v.Text == "" }

// rowKey identifies a row's content for duplicate detection.
func rowKey(row []table.Value) string {
	var b strings.Builder
	for _, v := range row {
		// Type and length first, so that no two rows share a key by accident.
		fmt.Fprintf(&b, "%d:%d:%s|", v.Type, len(v.Text), v.Text)
	}
	return b.String()
}

// columnStats describes each column of rows.
func columnStats(header []string, rows [][]table.Value) []Column {
	cols := make([]Column, len(header))
	for j, name := range header {
		col := Column{Name: name}
		typ := table.Null
		distinct := map[string]bool{}
		var (
			minV, maxV      string
			minF, maxF, sum float64
			numeric         int
			haveStr         bool
		)
		for _, row := range rows {
			v := row[j]
			if isMissing(v) {
				col.Nulls++
				continue
			}
			col.NonNull++
			typ = typ.Join(v.Type)
			distinct[v.Text] = true
			switch v.Type {
			case table.Integer, table.Number:
				f, err := strconv.ParseFloat(v.Text, 64)
				if err != nil && !isRangeErr(err) {
					continue
				}
				if numeric == 0 || f < minF {
					minF, minV = f, v.Text
				}
				if numeric == 0 || f > maxF {
					maxF, maxV = f, v.Text
				}
				sum += f
				numeric++
			}
		}
		col.Type = typ.String()
		col.Unique = len(distinct)
		switch typ {
		case table.Integer, table.Number:
			if numeric > 0 {
				col.Min, col.Max = json.Number(minV), json.Number(maxV)
				if mean := sum / float64(numeric); !math.IsInf(mean, 0) && !math.IsNaN(mean) {
					col.Mean = &mean
				}
			}
		case table.String:
			for _, row := range rows {
				v := row[j]
				if isMissing(v) {
					continue
				}
				if !haveStr || v.Text < minV {
					minV = v.Text
				}
				if !haveStr || v.Text > maxV {
					maxV = v.Text
				}
				haveStr = true
			}
			if haveStr {
				col.Min, col.Max = minV, maxV
			}
		}
		cols[j] = col
	}
	return cols
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// factNotes says, in plain words, what cleaning found and did.
func factNotes(t *table.Table, raw string, trimmedHeader, header []string, short, long []int, longData bool, emptyLines, dupLines []int, trimmed int) []string {
	var notes []string
	if strings.HasPrefix(raw, "\uFEFF") {
		notes = append(notes, "Removed the UTF-8 byte order mark at the start.")
	}
	if t.Format != table.JSON {
		crlf := strings.Count(raw, "\r\n")
		lf := strings.Count(raw, "\n") - crlf
		cr := strings.Count(raw, "\r") - crlf
		if kinds := btoi(crlf > 0) + btoi(lf > 0) + btoi(cr > 0); kinds > 1 {
			notes = append(notes, "Line endings were mixed (CRLF, LF or CR); the cleaned CSV uses CRLF throughout.")
		}
		if t.SkippedLines > 0 {
			notes = append(notes, fmt.Sprintf("Skipped %d blank %s.", t.SkippedLines, plural(t.SkippedLines, "line", "lines")))
		}
		if t.Delimiter != ',' {
			notes = append(notes, fmt.Sprintf("The input's delimiter was %s; the cleaned CSV uses commas.", delimiterName(t.Delimiter)))
		}
	}
	var renamed []string
	for i, name := range header {
		if i >= len(trimmedHeader) || name != trimmedHeader[i] {
			from := ""
			if i < len(t.Header) {
				from = t.Header[i]
			}
			renamed = append(renamed, fmt.Sprintf("%q → %q", from, name))
		}
	}
	if len(renamed) > 0 {
		notes = append(notes, "Renamed empty or repeated column names: "+strings.Join(renamed, ", ")+".")
	}
	if len(short) > 0 {
		notes = append(notes, fmt.Sprintf("%d %s had fewer fields than the header and %s padded with empty cells (%s).",
			len(short), plural(len(short), "row", "rows"), plural(len(short), "was", "were"), lineList(short)))
	}
	if len(long) > 0 {
		if longData {
			notes = append(notes, fmt.Sprintf("%d %s had more fields than the header; the extra values were kept in added columns (%s).",
				len(long), plural(len(long), "row", "rows"), lineList(long)))
		} else {
			notes = append(notes, fmt.Sprintf("%d %s had empty extra fields beyond the header, dropped (%s).",
				len(long), plural(len(long), "row", "rows"), lineList(long)))
		}
	}
	if trimmed > 0 {
		notes = append(notes, fmt.Sprintf("Trimmed white space around %d %s.", trimmed, plural(trimmed, "cell", "cells")))
	}
	if len(emptyLines) > 0 {
		notes = append(notes, fmt.Sprintf("Removed %d empty %s (%s).", len(emptyLines), plural(len(emptyLines), "row", "rows"), lineList(emptyLines)))
	}
	if len(dupLines) > 0 {
		notes = append(notes, fmt.Sprintf("Removed %d duplicate %s, keeping the first occurrence (%s).", len(dupLines), plural(len(dupLines), "row", "rows"), lineList(dupLines)))
	}
	return notes
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// lineList names up to ten lines.
func lineList(lines []int) string {
	word := "line"
	if len(lines) > 1 {
		word = "lines"
	}
	parts := make([]string, 0, min(len(lines), 10))
	for _, l := range lines[:min(len(lines), 10)] {
		parts = append(parts, strconv.Itoa(l))
	}
	s := word + " " + strings.Join(parts, ", ")
	if len(lines) > 10 {
		s += fmt.Sprintf(" and %d more", len(lines)-10)
	}
	return s
}

func delimiterName(d byte) string {
	return cmp.Or(map[byte]string{',': "comma", ';': "semicolon", '\t': "tab", '|': "pipe"}[d], strconv.QuoteRune(rune(d)))
}

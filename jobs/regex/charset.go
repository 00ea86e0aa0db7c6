package regex

import (
	"slices"
	"strings"
	"unicode"
)

// runeRange is the closed interval lo..hi of code points.
type runeRange struct{ lo, hi rune }

// charSet is a set of code points: sorted, disjoint, non-adjacent ranges.
type charSet []runeRange

// Surrogates can never occur in the text (it is UTF-8), so sets never hold
// them; a pattern that names only surrogates matches nothing.
var (
	surrogates = charSet{{0xD800, 0xDFFF}}
	// lineTerminators are JavaScript's LineTerminator characters.
	lineTerminators = charSet{{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}
	// spaceChars are JavaScript's \s: WhiteSpace and LineTerminator.
	spaceChars = charSet{{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680},
		{0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
		{0x3000, 0x3000}, {0xFEFF, 0xFEFF}}
	digitChars = charSet{{'0', '9'}}
	wordChars  = charSet{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}
	// wordCharsIU is \w under the i and u flags together: the characters
	// whose simple case folding is a basic word character add ſ and K.
	wordCharsIU = charSet{{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}, {0x17F, 0x17F}, {0x212A, 0x212A}}
	allChars    = charSet{{0, unicode.MaxRune}}
)

// multiUpper lists the BMP characters whose JavaScript toUpperCase is more
// than one UTF-16 unit (Unicode SpecialCasing.txt, unconditional mappings).
// Without the u flag, case-insensitive matching leaves them unchanged.
var multiUpper = charSet{{0xDF, 0xDF}, {0x149, 0x149}, {0x1F0, 0x1F0}, {0x390, 0x390},
	{0x3B0, 0x3B0}, {0x587, 0x587}, {0x1E96, 0x1E9A}, {0x1F50, 0x1F50}, {0x1F52, 0x1F52},
	{0x1F54, 0x1F54}, {0x1F56, 0x1F56}, {0x1F80, 0x1FAF}, {0x1FB2, 0x1FB4}, {0x1FB6, 0x1FB7},
	{0x1FBC, 0x1FBC}, {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FC7}, {0x1FCC, 0x1FCC}, {0x1FD2, 0x1FD3},
	{0x1FD6, 0x1FD7}, {0x1FE2, 0x1FE4}, {0x1FE6, 0x1FE7}, {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FF7},
	{0x1FFC, 0x1FFC}, {0xFB00, 0xFB06}, {0xFB13, 0xFB17}}

// foldOutsideCaseRanges are the characters with a non-trivial simple case
// folding orbit that unicode.CaseRanges does not list (ß, whose orbit holds
// ẞ). TestFoldOutsideCaseRanges checks the list against the unicode tables.
var foldOutsideCaseRanges = []rune{0xDF}

func single(r rune) charSet { return charSet{{r, r}} }

// normalize sorts and merges rs into a charSet.
func normalize(rs []runeRange) charSet {
	slices.SortFunc(rs, func(a, b runeRange) int { return int(a.lo - b.lo) })
	out := rs[:0]
	for _, r := range rs {
		if n := len(out); n > 0 && r.lo <= out[n-1].hi+1 {
			out[n-1].hi = max(out[n-1].hi, r.hi)
			continue
		}
		out = append(out, r)
	}
	return charSet(out)
}

func union(sets ...charSet) charSet {
	var rs []runeRange
	for _, s := range sets {
		rs = append(rs, s...)
	}
	return normalize(rs)
}

// negate returns the complement of s in 0..MaxRune.
func (s charSet) negate() charSet {
	var out charSet
	next := rune(0)
	for _, r := range s {
		if r.lo > next {
			out = append(out, runeRange{next, r.lo - 1})
		}
		next = r.hi + 1
	}
	if next <= unicode.MaxRune {
		out = append(out, runeRange{next, unicode.MaxRune})
	}
	return out
}

// minus returns the members of s not in t.
func (s charSet) minus(t charSet) charSet {
	nt := t.negate()
	var out charSet
	i, j := 0, 0
	for i < len(s) && j < len(nt) {
		lo, hi := max(s[i].lo, nt[j].lo), min(s[i].hi, nt[j].hi)
		if lo <= hi {
			out = append(out, runeRange{lo, hi})
		}
		if s[i].hi < nt[j].hi {
			i++
		} else {
			j++
		}
	}
	return out
}

func (s charSet) contains(c rune) bool {
	_, found := slices.BinarySearchFunc(s, c, func(r runeRange, c rune) int {
		switch {
		case r.hi < c:
			return -1
		case r.lo > c:
			return 1
		}
		return 0
	})
	return found
}

// single returns the set's only member, if it has exactly one.
func (s charSet) single() (rune, bool) {
	if len(s) == 1 && s[0].lo == s[0].hi {
		return s[0].lo, true
	}
	return 0, false
}

// canonicalize is JavaScript's Canonicalize without the u flag: the
// character's toUpperCase when that is one UTF-16 unit and does not map a
// non-ASCII character to ASCII; the character itself otherwise.
func canonicalize(c rune) rune {
	if c > 0xFFFF || multiUpper.contains(c) {
		return c
	}
	u := unicode.ToUpper(c)
	if c >= 128 && u < 128 {
		return c
	}
	return u
}

// appendEquivalents appends the characters that case-insensitive matching
// treats as equal to c. With the u flag that is c's simple case folding
// orbit; without it, the members of the orbit that canonicalize alike.
func appendEquivalents(dst []runeRange, c rune, unicodeMode bool) []runeRange {
	want := canonicalize(c)
	for f := unicode.SimpleFold(c); f != c; f = unicode.SimpleFold(f) {
		if unicodeMode || canonicalize(f) == want {
			dst = append(dst, runeRange{f, f})
		}
	}
	return dst
}

// caseClose returns s with every character's case equivalents added, so
// that a class matches what JavaScript's i flag matches.
func caseClose(s charSet, unicodeMode bool) charSet {
	add := []runeRange(nil)
	visit := func(lo, hi rune) {
		for _, r := range s {
			a, b := max(lo, r.lo), min(hi, r.hi)
			for c := a; c <= b; c++ {
				add = appendEquivalents(add, c, unicodeMode)
			}
		}
	}
	for _, cr := range unicode.CaseRanges {
		visit(rune(cr.Lo), rune(cr.Hi))
	}
	for _, c := range foldOutsideCaseRanges {
		visit(c, c)
	}
	if len(add) == 0 {
		return s
	}
	return union(s, add)
}

// fromTable converts a unicode.RangeTable.
func fromTable(t *unicode.RangeTable) charSet {
	var rs []runeRange
	for _, r := range t.R16 {
		if r.Stride == 1 {
			rs = append(rs, runeRange{rune(r.Lo), rune(r.Hi)})
			continue
		}
		for c := rune(r.Lo); c <= rune(r.Hi); c += rune(r.Stride) {
			rs = append(rs, runeRange{c, c})
		}
	}
	for _, r := range t.R32 {
		if r.Stride == 1 {
			rs = append(rs, runeRange{rune(r.Lo), rune(r.Hi)})
			continue
		}
		for c := rune(r.Lo); c <= rune(r.Hi); c += rune(r.Stride) {
			rs = append(rs, runeRange{c, c})
		}
	}
	return normalize(rs)
}

// generalCategories maps JavaScript's long General_Category names to the
// short ones Go's unicode tables use.
var generalCategories = map[string]string{
	"Letter": "L", "Cased_Letter": "LC", "Uppercase_Letter": "Lu", "Lowercase_Letter": "Ll",
	"Titlecase_Letter": "Lt", "Modifier_Letter": "Lm", "Other_Letter": "Lo",
	"Mark": "M", "Combining_Mark": "M", "Nonspacing_Mark": "Mn", "Spacing_Mark": "Mc", "Enclosing_Mark": "Me",
	"Number": "N", "Decimal_Number": "Nd", "digit": "Nd", "Letter_Number": "Nl", "Other_Number": "No",
	"Punctuation": "P", "punct": "P", "Connector_Punctuation": "Pc", "Dash_Punctuation": "Pd",
	"Open_Punctuation": "Ps", "Close_Punctuation": "Pe", "Initial_Punctuation": "Pi",
	"Final_Punctuation": "Pf", "Other_Punctuation": "Po",
	"Symbol": "S", "Math_Symbol": "Sm", "Currency_Symbol": "Sc", "Modifier_Symbol": "Sk", "Other_Symbol": "So",
	"Separator": "Z", "Space_Separator": "Zs", "Line_Separator": "Zl", "Paragraph_Separator": "Zp",
	"Other": "C", "Control": "Cc", "cntrl": "Cc", "Format": "Cf", "Surrogate": "Cs",
	"Private_Use": "Co", "Unassigned": "Cn",
}

// binaryProperties maps the binary property names (and aliases) JavaScript
// accepts to the name of a Go unicode.Properties table, for those Go has.
var binaryProperties = map[string]string{
	"ASCII_Hex_Digit": "ASCII_Hex_Digit", "AHex": "ASCII_Hex_Digit",
	"Bidi_Control": "Bidi_Control", "Bidi_C": "Bidi_Control",
	"Dash": "Dash", "Deprecated": "Deprecated", "Dep": "Deprecated",
	"Diacritic": "Diacritic", "Dia": "Diacritic", "Extender": "Extender", "Ext": "Extender",
	"Hex_Digit": "Hex_Digit", "Hex": "Hex_Digit",
	"IDS_Binary_Operator": "IDS_Binary_Operator", "IDSB": "IDS_Binary_Operator",
	"IDS_Trinary_Operator": "IDS_Trinary_Operator", "IDST": "IDS_Trinary_Operator",
	"Ideographic": "Ideographic", "Ideo": "Ideographic", "Join_Control": "Join_Control", "Join_C": "Join_Control",
	"Logical_Order_Exception": "Logical_Order_Exception", "LOE": "Logical_Order_Exception",
	"Noncharacter_Code_Point": "Noncharacter_Code_Point", "NChar": "Noncharacter_Code_Point",
	"Pattern_Syntax": "Pattern_Syntax", "Pat_Syn": "Pattern_Syntax",
	"Pattern_White_Space": "Pattern_White_Space", "Pat_WS": "Pattern_White_Space",
	"Quotation_Mark": "Quotation_Mark", "QMark": "Quotation_Mark", "Radical": "Radical",
	"Regional_Indicator": "Regional_Indicator", "RI": "Regional_Indicator",
	"Sentence_Terminal": "Sentence_Terminal", "STerm": "Sentence_Terminal",
	"Soft_Dotted": "Soft_Dotted", "SD": "Soft_Dotted",
	"Terminal_Punctuation": "Terminal_Punctuation", "Term": "Terminal_Punctuation",
	"Unified_Ideograph": "Unified_Ideograph", "UIdeo": "Unified_Ideograph",
	"Variation_Selector": "Variation_Selector", "VS": "Variation_Selector",
	"White_Space": "White_Space", "space": "White_Space",
}

// propertySet returns the set of a \p{...} body, or ok false when the
// property is not one this implementation knows.
func propertySet(body string) (charSet, bool) {
	name, value, hasValue := strings.Cut(body, "=")
	if hasValue {
		switch name {
		case "General_Category", "gc":
			return categorySet(value)
		case "Script", "sc":
			if t, ok := unicode.Scripts[value]; ok {
				return fromTable(t), true
			}
		}
		return nil, false
	}
	if s, ok := categorySet(name); ok {
		return s, true
	}
	switch name {
	case "Any":
		return allChars, true
	case "ASCII":
		return charSet{{0, 0x7F}}, true
	case "Assigned":
		s, _ := categorySet("Cn")
		return s.negate(), true
	case "Alphabetic", "Alpha":
		return union(fromTable(unicode.L), fromTable(unicode.Nl), fromTable(unicode.Other_Alphabetic)), true
	case "Lowercase", "Lower":
		return union(fromTable(unicode.Ll), fromTable(unicode.Other_Lowercase)), true
	case "Uppercase", "Upper":
		return union(fromTable(unicode.Lu), fromTable(unicode.Other_Uppercase)), true
	case "Math":
		return union(fromTable(unicode.Sm), fromTable(unicode.Other_Math)), true
	}
	if p, ok := binaryProperties[name]; ok {
		return fromTable(unicode.Properties[p]), true
	}
	return nil, false
}

// categorySet returns the set of a General_Category value, short or long.
func categorySet(v string) (charSet, bool) {
	if long, ok := generalCategories[v]; ok {
		v = long
	}
	switch v {
	case "Cn":
		var assigned []charSet
		for name, t := range unicode.Categories {
			if len(name) == 2 {
				assigned = append(assigned, fromTable(t))
			}
		}
		return union(assigned...).negate(), true
	case "C":
		cn, _ := categorySet("Cn")
		return union(fromTable(unicode.C), cn), true
	}
	if t, ok := unicode.Categories[v]; ok {
		return fromTable(t), true
	}
	return nil, false
}

package warmpool

import (
	"errors"
	"testing"
)

// Quantities are read exactly, as Kubernetes reads them, rounded up; what is not one,
// is negative or overflows is named.
func TestParseQuantity(t *testing.T) {
	for _, tc := range []struct {
		in           string
		milli, whole int64
		err          error
	}{
		{"4", 4000, 4, nil},
		{"1500m", 1500, 2, nil},
		{"0.5", 500, 1, nil},
		{".25", 250, 1, nil},
		{"2.", 2000, 2, nil},
		{"1m", 1, 1, nil},
		{"1u", 1, 1, nil}, // rounded up
		{"8Gi", 8 << 30 * 1000, 8 << 30, nil},
		{"512Mi", 512 << 20 * 1000, 512 << 20, nil},
		{"1.5Gi", 3 << 29 * 1000, 3 << 29, nil},
		{"1k", 1e6, 1e3, nil},
		{"1e3", 1e6, 1e3, nil},
		{"25E-1", 2500, 3, nil},
		{"+3", 3000, 3, nil},
		{"0", 0, 0, nil},
		{"-1", 0, 0, ErrQuantityNegative},
		{"-500m", 0, 0, ErrQuantityNegative},
		{"8Eb", 0, 0, ErrQuantitySyntax},
		{"", 0, 0, ErrQuantitySyntax},
		{"Gi", 0, 0, ErrQuantitySyntax},
		{"1 Gi", 0, 0, ErrQuantitySyntax},
		{"0x10", 0, 0, ErrQuantitySyntax},
		{"8E", 0, 0, ErrQuantityTooLarge},
		{"1e999", 0, 0, ErrQuantityTooLarge},
	} {
		milli, whole, err := ParseQuantity(tc.in)
		if !errors.Is(err, tc.err) || milli != tc.milli || whole != tc.whole {
			t.Errorf("ParseQuantity(%q) = %d, %d, %v; want %d, %d, %v", tc.in, milli, whole, err, tc.milli, tc.whole, tc.err)
		}
	}
}

func TestFormatQuantities(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{FormatMilli(0), "0"}, {FormatMilli(2000), "2"}, {FormatMilli(1500), "1500m"},
		{FormatBytes(0), "0"}, {FormatBytes(3 << 30), "3Gi"}, {FormatBytes(1536 << 20), "1536Mi"},
		{FormatBytes(1000), "1000"}, {FormatBytes(2048), "2Ki"}, {FormatBytes(1 << 60), "1Ei"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

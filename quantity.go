package warmpool

import (
	"errors"
	"math/big"
	"regexp"
	"strconv"
	"strings"
)

// quantityGrammar is a Kubernetes quantity: a signed decimal number, then a binary
// suffix (Ki … Ei), a decimal one (n, u, m, k, M … E) or a decimal exponent (e3, E-2).
var quantityGrammar = regexp.MustCompile(`^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]{1,3})?$`)

// The faults of ParseQuantity.
var (
	ErrQuantitySyntax   = errors.New("not a Kubernetes quantity")
	ErrQuantityNegative = errors.New("negative")
	ErrQuantityTooLarge = errors.New("too large")
)

// quantitySuffixes are the multipliers of the quantity suffixes.
var quantitySuffixes = map[string]*big.Rat{
	"": big.NewRat(1, 1), "n": big.NewRat(1, 1e9), "u": big.NewRat(1, 1e6), "m": big.NewRat(1, 1e3),
	"k": big.NewRat(1e3, 1), "M": big.NewRat(1e6, 1), "G": big.NewRat(1e9, 1), "T": big.NewRat(1e12, 1),
	"P": big.NewRat(1e15, 1), "E": big.NewRat(1e18, 1),
	"Ki": big.NewRat(1<<10, 1), "Mi": big.NewRat(1<<20, 1), "Gi": big.NewRat(1<<30, 1),
	"Ti": big.NewRat(1<<40, 1), "Pi": big.NewRat(1<<50, 1), "Ei": big.NewRat(1<<60, 1),
}

// ParseQuantity reads a Kubernetes quantity ("4", "1500m", "8Gi", "1e9") exactly and
// returns it in thousandths of its unit (millicores of a CPU quantity) and in whole
// units (bytes of a memory quantity), each rounded up as Kubernetes' MilliValue and
// Value round. Errors: ErrQuantitySyntax, ErrQuantityNegative, ErrQuantityTooLarge
// (its thousandths do not fit an int64).
func ParseQuantity(s string) (milli, whole int64, err error) {
	m := quantityGrammar.FindStringSubmatch(s)
	if m == nil {
		return 0, 0, ErrQuantitySyntax
	}
	num := m[1]
	if strings.HasSuffix(num, ".") {
		num += "0"
	}
	v, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, 0, ErrQuantitySyntax
	}
	if suffix := m[2]; len(suffix) > 1 && (suffix[0] == 'e' || suffix[0] == 'E') {
		exp, _ := strconv.Atoi(suffix[1:]) // the grammar holds it to 1-3 digits
		ten := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(abs(exp))), nil)
		if exp >= 0 {
			v.Mul(v, new(big.Rat).SetInt(ten))
		} else {
			v.Quo(v, new(big.Rat).SetInt(ten))
		}
	} else {
		v.Mul(v, quantitySuffixes[suffix])
	}
	if v.Sign() < 0 {
		return 0, 0, ErrQuantityNegative
	}
	thousandths := ceil(new(big.Rat).Mul(v, big.NewRat(1000, 1)))
	if !thousandths.IsInt64() {
		return 0, 0, ErrQuantityTooLarge
	}
	return thousandths.Int64(), ceil(v).Int64(), nil
}

// ceil is the smallest integer not below a non-negative v.
func ceil(v *big.Rat) *big.Int {
	q, r := new(big.Int).QuoRem(v.Num(), v.Denom(), new(big.Int))
	if r.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return q
}

func abs(n int) int { return max(n, -n) }

// FormatMilli writes thousandths of a unit as a Kubernetes quantity: whole units
// plainly ("2"), else in thousandths ("1500m").
func FormatMilli(milli int64) string {
	if milli%1000 == 0 {
		return strconv.FormatInt(milli/1000, 10)
	}
	return strconv.FormatInt(milli, 10) + "m"
}

// FormatBytes writes bytes as a Kubernetes quantity, in the largest binary unit that
// divides them ("3Gi", "1536Mi"), else plainly.
func FormatBytes(n int64) string {
	if n == 0 {
		return "0"
	}
	for i, suffix := range []string{"Ei", "Pi", "Ti", "Gi", "Mi", "Ki"} {
		unit := int64(1) << (10 * (6 - i))
		if n%unit == 0 {
			return strconv.FormatInt(n/unit, 10) + suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

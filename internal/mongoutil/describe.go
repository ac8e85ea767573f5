package mongoutil

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Describe is err's text with the server's error codes it carries, when
// the text does not show them: a driver error shows a code's name, and a
// code without a name (FerretDB 2.x's 16908292) not at all, while a reason
// recorded for a skipped firing must let an operator tell one failure from
// another.
func Describe(err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	var codes []string
	for _, c := range mongo.ErrorCodes(err) {
		s := strconv.Itoa(c)
		if c != 0 && !strings.Contains(msg, s) && !slices.Contains(codes, s) {
			codes = append(codes, s)
		}
	}
	if len(codes) == 0 {
		return msg
	}
	return fmt.Sprintf("%s (code %s)", msg, strings.Join(codes, ", "))
}

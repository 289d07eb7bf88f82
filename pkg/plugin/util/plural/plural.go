// Package plural words a count the way a person would: "1 rank", "2 ranks". Messages name
// counts that are often 1 (a single-node job has one rank, a failed delete may leave one
// object), and "1 ranks" reads as a bug.
package plural

import "strconv"

// Count is what the API and the plugin count in: len() gives int, resource quantities and
// Job counts int64 or int32.
type Count interface{ ~int | ~int32 | ~int64 }

// N is n followed by noun, with an "s" unless n is 1: N(1, "rank") is "1 rank", N(0, "rank")
// "0 ranks". Every noun the plugin counts takes a plain "s"; Word covers any that would not.
func N[T Count](n T, noun string) string {
	return strconv.FormatInt(int64(n), 10) + " " + Word(n, noun, noun+"s")
}

// Word is one when n is 1 and many otherwise: Word(n, "is", "are").
func Word[T Count](n T, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

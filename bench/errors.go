package bench

import "errors"

// Errors of the C loop that the tests match with errors.Is.
var (
	errSQFull  = errors.New("send queue full")
	errCQEmpty = errors.New("completion queue empty")
)

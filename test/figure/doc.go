// Package figure prints a suite's summary figure ("hostile inputs: 103 cases, ...") so that
// hack/testreport lists it under "figures:" at the end of `make test`, passed or failed.
package figure

package figure

import (
	"fmt"
	"testing"
)

// Prefix starts the output line hack/testreport picks up (its figurePrefix).
const Prefix = "figure: "

// Report logs the figure on t and prints it on standard output for the summary: go test -json
// reports a test's plain output lines as they are, while t.Log lines carry the file and line.
func Report(t testing.TB, format string, args ...any) {
	t.Helper()
	line := fmt.Sprintf(format, args...)
	t.Log(line)
	fmt.Println(Prefix + line)
}

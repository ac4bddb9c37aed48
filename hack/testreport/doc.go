// Command testreport reads `go test -json` on stdin and prints a readable progress log: one line
// per finished test, the full output of failed tests, every skip with its reason, and a closing
// line "N passed, N failed, N skipped". It exits non-zero when a test or package failed, or when
// CI=true and a test skipped for any reason other than "KVM not usable" (on CI machines a skipped
// privileged test hides a broken setup). Lines a test prints starting with "figure: " (e.g. the
// fault matrix's summary) are listed under "figures:" in the summary.
//
// With -short (make unit: `go test -short`) the skips of test/prereq's guards under -short are
// expected, also under CI=true: they are counted by what the tests need instead of listed.
package main

// Package poll has the waiting helpers the end-to-end tests of separate processes share:
// Until checks a condition with a deadline (never a bare sleep), Alive tells whether a process
// still runs (a zombie does not).
package poll

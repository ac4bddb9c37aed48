// Package optstest reads QEMU option strings back for tests: the argv tests of qemu and the
// argv fuzz target of controllers/translate check what an option string says with it.
package optstest

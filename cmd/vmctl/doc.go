// Command vmctl is the vmlet CLI: VM lifecycle through the API, console, raw QMP access and the
// QMP traffic log for debugging.
package main

//go:build alerting && linux

package alerting

import "syscall"

// sysProcAttr makes the kernel kill a child when the test binary dies (a
// panic, a -timeout), so no Prometheus or faxgate outlives its test run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

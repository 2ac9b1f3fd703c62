package redistest

import "syscall"

// sysProcAttr makes the kernel kill redis-server when the test binary dies
// (a panic, a -timeout), so no server outlives its test run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

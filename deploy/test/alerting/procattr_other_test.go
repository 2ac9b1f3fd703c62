//go:build alerting && !linux

package alerting

import "syscall"

// sysProcAttr has nothing to add outside Linux; t.Cleanup stops the children.
func sysProcAttr() *syscall.SysProcAttr { return nil }

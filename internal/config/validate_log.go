package config

// validateLog checks log.
func (v *validator) validateLog(l Log) {
	v.oneOf("log.level", l.Level, "debug", "info", "warn", "error")
	v.oneOf("log.format", l.Format, "json", "console")
}

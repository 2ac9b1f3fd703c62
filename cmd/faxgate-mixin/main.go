// Command faxgate-mixin writes faxgate's Prometheus alert rules and Grafana
// dashboard from their one source, deploy/mixin (docs/metrics-and-alerts.md):
//
//	faxgate-mixin [-selector 'job="faxgate"'] [-namespace NS] [-refresh-before 1h] [-overrides FILE]
//	              [-rules FILE] [-dashboard FILE] [-readme FILE] [-chart-rules FILE] [-chart-schema FILE]
//
// -overrides reads per-alert changes in the shape of the Helm chart's
// prometheusRule values (alerts.<Name>.enabled/severity/for/labels,
// additionalRuleLabels, runbookBaseURL), either alone or under a
// prometheusRule key of a whole values file; -namespace adds a namespace
// matcher to every selector, and -refresh-before sets the token alerts'
// thresholds as the chart does. -chart-rules writes the chart's source of
// the rules (each threshold left for the chart to fill in), and
// -chart-schema rewrites the config part of the chart's values schema from
// faxgate's configuration types. Each of -rules and -dashboard
// names a file to write ("-" for standard output); with neither, the rules
// go to standard output. -readme rewrites the alert table (default
// severities, meaning, first step) between its marker lines in FILE. make
// mixin writes the shipped files with the defaults.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/faxgate/faxgate/deploy/mixin"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("faxgate-mixin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	selector := fs.String("selector", mixin.DefaultSelector, "label matchers that select faxgate's series in every rule")
	overrides := fs.String("overrides", "", "YAML file of per-alert overrides (the chart's prometheusRule values)")
	namespace := fs.String("namespace", "", "the namespace the targets run in, a label of FaxgateAbsent (whose absent() keeps none)")
	rulesOut := fs.String("rules", "", "write the rules file here (- for standard output)")
	dashOut := fs.String("dashboard", "", "write the dashboard JSON here (- for standard output)")
	readme := fs.String("readme", "", "rewrite the alert table between its marker lines in this markdown file")
	refresh := fs.Duration("refresh-before", time.Hour, "the release's token.refresh_before: the token alerts' thresholds are shares of it")
	chartRules := fs.String("chart-rules", "", "write the Helm chart's source of the rules here: each threshold left for the chart to fill in")
	chartSchema := fs.String("chart-schema", "", "rewrite the config part of this Helm values schema from faxgate's configuration types")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "faxgate-mixin: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	opts := mixin.Options{Selector: *selector, Namespace: *namespace, RefreshBefore: *refresh}
	if *overrides != "" {
		o, err := readOverrides(*overrides)
		if err != nil {
			fmt.Fprintf(stderr, "faxgate-mixin: %v\n", err)
			return 1
		}
		opts.Overrides = o
	}
	if err := opts.Validate(); err != nil {
		fmt.Fprintf(stderr, "faxgate-mixin: %s: %v\n", *overrides, err)
		return 1
	}
	if *rulesOut == "" && *dashOut == "" && *readme == "" && *chartRules == "" && *chartSchema == "" {
		*rulesOut = "-"
	}
	if *rulesOut != "" {
		b, err := mixin.Rules(opts).YAML(*selector)
		if err == nil {
			err = write(*rulesOut, b, stdout)
		}
		if err != nil {
			fmt.Fprintf(stderr, "faxgate-mixin: rules: %v\n", err)
			return 1
		}
	}
	if *chartRules != "" {
		chart := opts
		chart.ChartSource = true
		b, err := mixin.Rules(chart).YAML(*selector)
		if err == nil {
			err = write(*chartRules, b, stdout)
		}
		if err != nil {
			fmt.Fprintf(stderr, "faxgate-mixin: chart rules: %v\n", err)
			return 1
		}
	}
	if *chartSchema != "" {
		b, err := os.ReadFile(*chartSchema)
		if err == nil {
			b, err = mixin.WithConfigSchema(b)
		}
		if err == nil {
			err = os.WriteFile(*chartSchema, b, 0o644)
		}
		if err != nil {
			fmt.Fprintf(stderr, "faxgate-mixin: chart schema: %v\n", err)
			return 1
		}
	}
	if *dashOut != "" {
		b, err := mixin.Dashboard().JSON()
		if err == nil {
			err = write(*dashOut, b, stdout)
		}
		if err != nil {
			fmt.Fprintf(stderr, "faxgate-mixin: dashboard: %v\n", err)
			return 1
		}
	}
	if *readme != "" {
		b, err := os.ReadFile(*readme)
		if err == nil {
			b, err = mixin.WithAlertTable(b)
		}
		if err == nil {
			err = os.WriteFile(*readme, b, 0o644)
		}
		if err != nil {
			fmt.Fprintf(stderr, "faxgate-mixin: readme: %v\n", err)
			return 1
		}
	}
	return 0
}

// readOverrides decodes an overrides file, strictly: a misspelt key is an
// error, not a setting silently ignored.
func readOverrides(path string) (mixin.Overrides, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return mixin.Overrides{}, err
	}
	var top map[string]yaml.Node
	if err := yaml.Unmarshal(b, &top); err != nil {
		return mixin.Overrides{}, fmt.Errorf("%s: %v", path, err)
	}
	if n, ok := top["prometheusRule"]; ok {
		// A whole values file: only prometheusRule's keys matter, and
		// others of the chart's (enabled, labels...) are allowed there.
		var o mixin.Overrides
		if err := n.Decode(&o); err != nil {
			return mixin.Overrides{}, fmt.Errorf("%s: prometheusRule: %v", path, err)
		}
		return o, nil
	}
	var o mixin.Overrides
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&o); err != nil && err != io.EOF {
		return mixin.Overrides{}, fmt.Errorf("%s: %v", path, err)
	}
	return o, nil
}

func write(path string, b []byte, stdout io.Writer) error {
	if path == "-" {
		_, err := stdout.Write(b)
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

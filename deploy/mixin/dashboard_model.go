package mixin

import (
	"encoding/json"
	"fmt"
)

// The parts of Grafana's dashboard JSON model the dashboard uses.

type dashboard struct {
	UID          string     `json:"uid"`
	Title        string     `json:"title"`
	Description  string     `json:"description"`
	Tags         []string   `json:"tags"`
	Timezone     string     `json:"timezone"`
	Editable     bool       `json:"editable"`
	GraphTooltip int        `json:"graphTooltip"`
	Schema       int        `json:"schemaVersion"`
	Version      int        `json:"version"`
	Refresh      string     `json:"refresh"`
	Time         timeRange  `json:"time"`
	Templating   templating `json:"templating"`
	Annotations  struct {
		List []any `json:"list"`
	} `json:"annotations"`
	Links  []link  `json:"links"`
	Panels []panel `json:"panels"`
}

type timeRange struct {
	From string `json:"from"`
	To   string `json:"to"`
}

type link struct {
	Title       string `json:"title"`
	Type        string `json:"type"`
	URL         string `json:"url"`
	TargetBlank bool   `json:"targetBlank"`
}

type templating struct {
	List []variable `json:"list"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// ds is every panel's, target's and variable's data source: the dashboard's
// datasource variable.
func ds() datasourceRef { return datasourceRef{Type: "prometheus", UID: "${datasource}"} }

type variable struct {
	Name        string         `json:"name"`
	Label       string         `json:"label"`
	Description string         `json:"description,omitempty"`
	Type        string         `json:"type"`
	Datasource  *datasourceRef `json:"datasource,omitempty"`
	Query       any            `json:"query"`
	Definition  string         `json:"definition,omitempty"`
	Refresh     int            `json:"refresh"`
	IncludeAll  bool           `json:"includeAll"`
	Multi       bool           `json:"multi"`
	AllValue    string         `json:"allValue,omitempty"`
	Current     map[string]any `json:"current"`
	Sort        int            `json:"sort,omitempty"`
	Hide        int            `json:"hide"`
}

type variableQuery struct {
	Query string `json:"query"`
	RefID string `json:"refId"`
}

type gridPos struct {
	H int `json:"h"`
	W int `json:"w"`
	X int `json:"x"`
	Y int `json:"y"`
}

type panel struct {
	Type        string         `json:"type"`
	Title       string         `json:"title"`
	ID          int            `json:"id"`
	Datasource  *datasourceRef `json:"datasource,omitempty"`
	Description string         `json:"description,omitempty"`
	GridPos     gridPos        `json:"gridPos"`
	Collapsed   *bool          `json:"collapsed,omitempty"`
	Panels      []panel        `json:"panels,omitempty"`
	FieldConfig *fieldConfig   `json:"fieldConfig,omitempty"`
	Options     map[string]any `json:"options,omitempty"`
	Targets     []target       `json:"targets,omitempty"`
}

type fieldConfig struct {
	Defaults  fieldDefaults `json:"defaults"`
	Overrides []any         `json:"overrides"`
}

type fieldDefaults struct {
	Unit       string         `json:"unit"`
	NoValue    string         `json:"noValue,omitempty"`
	Min        *float64       `json:"min,omitempty"`
	Max        *float64       `json:"max,omitempty"`
	Thresholds *thresholds    `json:"thresholds,omitempty"`
	Custom     map[string]any `json:"custom,omitempty"`
}

type thresholds struct {
	Mode  string `json:"mode"`
	Steps []step `json:"steps"`
}

// step is a threshold step; a nil Value is the base step.
type step struct {
	Color string   `json:"color"`
	Value *float64 `json:"value"`
}

type target struct {
	Datasource   datasourceRef `json:"datasource"`
	Expr         string        `json:"expr"`
	LegendFormat string        `json:"legendFormat"`
	RefID        string        `json:"refId"`
}

// JSON is the dashboard as Grafana imports it.
func (d dashboard) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	return append(b, '\n'), nil
}

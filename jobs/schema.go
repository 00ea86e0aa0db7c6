package jobs

import (
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/google/jsonschema-go/jsonschema"
)

// ResultSchema returns the JSON Schema of the result a call of the operation
// answers, inferred from the Go type of OutputExample (a pointer field may be
// null, a json.RawMessage holds any JSON value), with the "call_id" and "op"
// every result carries; without an example, any object with those two.
// It is the one result schema: the OpenAPI document and the MCP tools'
// output schemas both use it.
func (s *Spec) ResultSchema() (map[string]any, error) {
	schema := map[string]any{"type": "object"}
	if typ := reflect.TypeOf(s.OutputExample); typ != nil {
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		inferred, err := jsonschema.ForType(typ, &jsonschema.ForOptions{
			TypeSchemas: map[reflect.Type]*jsonschema.Schema{reflect.TypeFor[json.RawMessage](): {}},
		})
		if err != nil {
			return nil, fmt.Errorf("result schema of %s: %w", s.Name, err)
		}
		raw, err := json.Marshal(inferred)
		if err != nil {
			return nil, fmt.Errorf("result schema of %s: %w", s.Name, err)
		}
		if err := json.Unmarshal(raw, &schema); err != nil {
			return nil, fmt.Errorf("result schema of %s: %w", s.Name, err)
		}
	}
	if schema["type"] != "object" {
		return nil, fmt.Errorf("result schema of %s: the result is a %v, not an object", s.Name, schema["type"])
	}
	props, _ := schema["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
		schema["properties"] = props
	}
	props["call_id"] = map[string]any{"type": "string", "description": "the call's id"}
	props["op"] = map[string]any{"type": "string", "const": s.Name}
	required, _ := schema["required"].([]any)
	schema["required"] = append([]any{"call_id", "op"}, required...)
	return schema, nil
}

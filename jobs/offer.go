package jobs

import "github.com/x402d/x402d/x402"

// ReasonNoModel is why a model operation (Spec.UsesModel) is not sold
// while no model key is configured: its blocked reason in quotes and
// discovery documents.
const ReasonNoModel = "model not configured (GEMINI_API_KEY unset)"

// Offer returns what the quotes of the operation say (x402.NewCatalog): a
// model operation is not sold unless modelReady (a model key is
// configured).
func (s *Spec) Offer(modelReady bool) x402.Offer {
	o := x402.Offer{Name: s.Name, Price: s.Price, Description: s.Description,
		InputExample: s.InputExample, InputSchema: s.InputSchema, OutputExample: s.OutputExample}
	if s.UsesModel && !modelReady {
		o.Unavailable = ReasonNoModel
	}
	return o
}

// Offers returns the offers of specs, in order (Spec.Offer).
func Offers(specs []Spec, modelReady bool) []x402.Offer {
	out := make([]x402.Offer, len(specs))
	for i := range specs {
		out[i] = specs[i].Offer(modelReady)
	}
	return out
}

require "stripe"

Stripe.api_key = "@@SECRET:stripe@@" # want: hardcoded-secret

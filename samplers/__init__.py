"""Samplers that drive a model under a grammar: grammar-aligned sampling (gcd / asap / exact /
awrs), sequential Monte Carlo with AWRS particles, and the infilling loops (diffusion,
fill-in-the-middle)."""

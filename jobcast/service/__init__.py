"""The forecast service: job requests, deployments in, typed forecasts out, routed between
the end-to-end models and the layerwise path; comparisons, prices and live ETAs."""

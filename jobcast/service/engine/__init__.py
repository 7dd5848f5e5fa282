"""The forecasting engine: a request, the routes that propose answers, the forecaster
that lets the backtest choose, and the fit that learns it (docs/architecture.md)."""

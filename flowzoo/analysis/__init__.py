"""Reading runs: curves (peak / final / trajectory class), the report and its plots. No torch."""

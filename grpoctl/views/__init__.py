"""What `grpoctl compare`, `report` and the dashboard draw from a comparison: its tables
(compare_view.py), reports (report_view.py, report_evals.py) and figures (report_plots.py).
Here, below cli/ and ui/, so that both draw the same thing."""

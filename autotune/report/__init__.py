"""What a cache says about its fusions, for people: per-fusion records
with every candidate and why the winner won (summary.py), and the HTML
report page built from them (page.py)."""

"""What rank functions share to measure (never the subject of a chapter): collective counting, timing,
traces and timelines, small models and data, optimizer-state accounting, stack dumps and flight-recorder files."""

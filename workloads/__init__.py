"""The experiment itself: tasks, models, training and evaluation. Knows nothing of Ray."""

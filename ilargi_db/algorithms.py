"""The algorithms ilargi_db trains, by name: light, so the command line lists them without loading the models."""

SUPERVISED = ("linear_regression", "logistic_regression")
UNSUPERVISED = ("kmeans", "gnmf")
NAMES = SUPERVISED + UNSUPERVISED

"""The crash-state core: what every kind that cuts crash states from a log shares."""

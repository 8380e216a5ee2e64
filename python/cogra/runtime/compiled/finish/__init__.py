"""From kernel channels to the result's Arrow columns."""

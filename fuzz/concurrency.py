"""placeholder"""
TARGETS = {}

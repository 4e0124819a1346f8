"""moves"""

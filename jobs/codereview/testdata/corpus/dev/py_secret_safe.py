import os

API_KEY = os.environ["API_KEY"]
AWS_ACCESS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
PASSWORD_PROMPT = "Enter your password:"
password = os.getenv("DB_PASSWORD", "")

DATABASE = {
    "host": "db.internal",
    "user": "app",
}
db_password = "h7Gk2pQx9LmR4vTzW8"  # want: hardcoded-secret

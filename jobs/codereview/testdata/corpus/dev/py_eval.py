from flask import request


def calc():
    expr = request.args.get("expr")
    return str(eval(expr))  # want: code-eval


def run_plugin(source):
    exec(source)  # want: code-eval


def legacy():
    return eval("1 + 2")  # want: code-eval

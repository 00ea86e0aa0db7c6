import ast
import json


def parse(value, model, df):
    model.eval()
    total = df.eval("a + b")
    data = json.loads(value)
    literal = ast.literal_eval(value)
    return data, literal, total

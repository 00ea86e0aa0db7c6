<?php
$code = $_POST['code'];
eval($code); // want: code-eval
$fn = create_function('$a', 'return $a * ' . $_GET['factor'] . ';'); // want: code-eval
$out = preg_replace('/(\w+)/e', 'strtoupper("$1")', $input); // want: code-eval
